//! The `GstTracer` subclass: parses the settings and forwards hooks.

use std::sync::atomic::{AtomicBool, Ordering};

use gst::glib;
use gst::prelude::*;
use gst::subclass::prelude::*;

use super::recorder;
use super::session;
use super::settings::Settings;

/// Implementation of the latlab tracer.
#[derive(Default)]
pub struct LatlabTracer {
    /// Whether this instance started the recorder (and so closes it).
    recording: AtomicBool,
}

#[glib::object_subclass]
impl ObjectSubclass for LatlabTracer {
    const NAME: &'static str = "GstLatlabTracer";
    type Type = super::LatlabTracer;
    type ParentType = gst::Tracer;
}

impl ObjectImpl for LatlabTracer {
    fn constructed(&self) {
        self.parent_constructed();
        let params = self.obj().property::<Option<String>>("params");
        let settings = Settings::from_params(params.as_deref());
        if !session::start(&settings) {
            return;
        }
        self.recording.store(true, Ordering::SeqCst);
        for hook in [
            TracerHook::PadPushPre,
            TracerHook::PadPushPost,
            TracerHook::PadPushListPre,
            TracerHook::PadPushListPost,
            TracerHook::PadPushEventPre,
            TracerHook::PadLinkPost,
            TracerHook::ElementChangeStatePost,
            TracerHook::ObjectDestroyed,
        ] {
            self.register_hook(hook);
        }
    }

    fn dispose(&self) {
        if self.recording.swap(false, Ordering::SeqCst) {
            session::shutdown();
        }
    }
}

impl GstObjectImpl for LatlabTracer {}

impl TracerImpl for LatlabTracer {
    fn pad_push_pre(&self, _ts: u64, pad: &gst::Pad, buffer: &gst::Buffer) {
        recorder::on_push(pad, buffer);
    }

    fn pad_push_post(
        &self,
        _ts: u64,
        pad: &gst::Pad,
        _result: Result<gst::FlowSuccess, gst::FlowError>,
    ) {
        recorder::on_push_post(pad);
    }

    fn pad_push_list_pre(&self, _ts: u64, pad: &gst::Pad, list: &gst::BufferList) {
        recorder::on_push_list(pad, list);
    }

    fn pad_push_list_post(
        &self,
        _ts: u64,
        pad: &gst::Pad,
        _result: Result<gst::FlowSuccess, gst::FlowError>,
    ) {
        recorder::on_push_post(pad);
    }

    fn pad_push_event_pre(&self, _ts: u64, pad: &gst::Pad, event: &gst::Event) {
        recorder::on_event(pad, event);
    }

    fn pad_link_post(
        &self,
        _ts: u64,
        src: &gst::Pad,
        _sink: &gst::Pad,
        result: Result<gst::PadLinkSuccess, gst::PadLinkError>,
    ) {
        if result.is_ok() {
            recorder::on_link(src);
        }
    }

    fn element_change_state_post(
        &self,
        _ts: u64,
        element: &gst::Element,
        change: gst::StateChange,
        result: Result<gst::StateChangeSuccess, gst::StateChangeError>,
    ) {
        recorder::on_state_changed(element, change, result);
    }

    fn object_destroyed(&self, _ts: u64, object: std::ptr::NonNull<gst::ffi::GstObject>) {
        recorder::on_object_destroyed(object.as_ptr() as usize);
    }
}
